"""Kept for migration 0006, which names this path: the field lives in `notifications.models.addresses`."""

from notifications.models.addresses import AddressesField as AddressesField
