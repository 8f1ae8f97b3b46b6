"""What a message says: the restricted template engine and an email's rendered content.

Below the models because a row's validation compiles its templates and checks its
language; the email channel renders with the same code.
"""
