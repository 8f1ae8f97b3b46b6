"""The inbox channel: a message in the recipient's inbox inside the site (`InboxMessage`).

- `rules`: what a row naming it needs (a `recipient`; `channel_data["inbox"]`'s `url` and
  `data`) and how its message is rendered (as email renders a row: templates, language,
  digests).
- `checks`: its system checks (W050, the retention).
- `channel`: `InboxChannel`. Its send touches no database (it runs in the tick's worker
  threads): it renders the message and hands it back on its result
  (`ChannelResult.inserts`), and the tick's write-back inserts it in the transaction that
  settles the firing, once per (row, firing) whatever is written twice.
"""
