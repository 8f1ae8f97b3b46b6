// The inbox badge ({% inbox_badge %}): keeps its unread count fresh by asking inbox/counts
// every data-nq-poll-seconds while the page is visible (never while it is hidden), with
// If-None-Match (a 304 costs nothing to read), and waits twice as long after each failed
// request (up to 16 times the interval), back to the interval after a success.
// A 401 (signed out) stops it. Loaded as a file, never inline: it runs under
// Content-Security-Policy script-src 'self'.
"use strict";
(function () {
  var MAX_BACKOFF = 16; // the interval times this at most, while requests fail

  function start(badge) {
    if (badge.dataset.nqStarted) return; // the script may be included once per badge
    badge.dataset.nqStarted = "1";
    var url = badge.dataset.nqInboxCounts;
    // Fractions are allowed ({% inbox_badge poll_seconds=0.5 %}); never more than 20 a second.
    var interval = Math.max(0.05, Number(badge.dataset.nqPollSeconds) || 30) * 1000;
    var count = badge.querySelector(".nq-inbox-unread");
    var etag = null, failures = 0, timer = null, asking = false, stopped = false;

    function wait() {
      clearTimeout(timer);
      timer = null;
      if (stopped || document.hidden) return; // visibilitychange starts it again
      timer = setTimeout(ask, interval * Math.min(Math.pow(2, failures), MAX_BACKOFF));
    }

    function show(counts) {
      count.textContent = String(counts.unread);
      badge.classList.toggle("nq-inbox-has-unread", counts.unread > 0);
    }

    function ask() {
      timer = null;
      asking = true;
      var headers = { Accept: "application/json" };
      if (etag) headers["If-None-Match"] = etag;
      fetch(url, { credentials: "same-origin", cache: "no-store", headers: headers })
        .then(function (response) {
          if (response.status === 304) return null;
          if (response.status === 401) {
            stopped = true;
            return null;
          }
          if (!response.ok) throw new Error("HTTP " + response.status);
          var tag = response.headers.get("ETag");
          return response.json().then(function (counts) {
            etag = tag;
            show(counts);
          });
        })
        .then(function () {
          failures = 0;
        }, function () {
          failures += 1;
        })
        .then(function () {
          asking = false;
          wait();
        });
    }

    document.addEventListener("visibilitychange", function () {
      if (document.hidden) {
        clearTimeout(timer);
        timer = null;
      } else if (!timer && !asking) {
        ask(); // back on the page: the count may be stale
      }
    });
    wait();
  }

  document.querySelectorAll("a[data-nq-inbox-counts]").forEach(start);
})();
