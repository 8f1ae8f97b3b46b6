"""What recipients use themselves: the unsubscribe page and the preference centre (`views`)."""
