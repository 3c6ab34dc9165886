"""Read-only links to a conversation: made, updated and revoked by its owner, taken down by staff,
read by anyone who has the link (services write, selectors read)."""
