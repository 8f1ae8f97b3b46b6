"""A cron-driven notification queue for Django in which the database is the queue."""

__version__ = "0.1.0"
