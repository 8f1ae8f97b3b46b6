"""The demo site's own page: what a host site's page with the inbox bell looks like."""

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse

# As strict as a site may be: the badge's script is a static file, so it still runs.
CONTENT_SECURITY_POLICY = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'"


@login_required
def home(request: HttpRequest) -> HttpResponse:
    """A page of the demo site with `{% inbox_badge %}` in its header."""
    response = TemplateResponse(request, "demo/home.html")
    response["Content-Security-Policy"] = CONTENT_SECURITY_POLICY
    return response
