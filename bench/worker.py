"""One measured job in its own process: `python -m bench.worker JOB '{json args}'`.

Django starts before the clock does, so each figure is the job alone. Prints one
JSON line: wall-clock start and end (for jobs run side by side), seconds, peak RSS.
"""

from __future__ import annotations

import io
import json
import os
import resource
import sys
import time
from concurrent.futures import ThreadPoolExecutor

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench.settings")


def _rss_kb() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def runtick(args: dict) -> dict:
    """`manage.py runtick`, as cron runs it."""
    from django.core.management import call_command

    out = io.StringIO()
    before = _rss_kb()
    start = time.time()
    call_command("runtick", stdout=out, **args)
    end = time.time()
    return {"start": start, "end": end, "summary": out.getvalue().strip(), "rss_before_kb": before}


def post_office(args: dict) -> dict:
    """django-post-office's `send_queued_mail`, its documented cron command."""
    from django.core.management import call_command

    before = _rss_kb()
    start = time.time()
    call_command("send_queued_mail", lockfile=args["lockfile"], processes=1)
    end = time.time()
    return {"start": start, "end": end, "rss_before_kb": before}


def plain_requests(args: dict) -> dict:
    """The limit: plain requests posting the same signed bodies, no database, no engine."""
    import threading
    import uuid

    import requests
    from django.utils import timezone

    from notifications import signing
    from notifications.channels import Firing
    from notifications.channels.webhook import body, message_id
    from notifications.conf import app_settings
    from notifications.models import Notification

    keys = [signing.secret_key(s) for s in app_settings.webhook_secrets]
    fired_at = timezone.now()
    jobs = []
    for pk in range(1, args["rows"] + 1):
        row = Notification(pk=pk, channels=["webhook"], webhook_url=args["url"], payload=args["payload"])
        firing = Firing(row, str(uuid.uuid4()), fired_at, ["webhook"])
        data = body(firing)
        headers = signing.headers(keys, message_id(firing), int(fired_at.timestamp()), data)
        headers["content-type"] = "application/json"
        jobs.append((data, headers))
    local = threading.local()

    def post(job: tuple[bytes, dict]) -> int:
        session = getattr(local, "session", None)
        if session is None:
            session = local.session = requests.Session()
        response = session.post(args["url"], data=job[0], headers=job[1], timeout=10)
        return response.status_code

    before = _rss_kb()
    start = time.time()
    with ThreadPoolExecutor(args["concurrency"]) as pool:
        statuses = list(pool.map(post, jobs, chunksize=16))
    end = time.time()
    return {"start": start, "end": end, "ok": sum(1 for s in statuses if s == 200), "rss_before_kb": before}


JOBS = {"runtick": runtick, "post_office": post_office, "plain_requests": plain_requests}


def main() -> None:
    import django

    job, args = sys.argv[1], json.loads(sys.argv[2] if len(sys.argv) > 2 else "{}")
    barrier = args.pop("barrier", False)
    django.setup()
    if barrier:  # several jobs start together: say ready, wait for the go line
        print("ready", flush=True)
        sys.stdin.readline()
    result = JOBS[job](args)
    result["seconds"] = result["end"] - result["start"]
    result["rss_peak_kb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
