"""What recipients use themselves: the unsubscribe page and the preference centre (`views`),
and the filter that keeps their links' tokens out of Django's request logs (`logs`)."""
