"""What the catalog tells the layers above it, which it must not import (DESIGN §1)."""

from django.dispatch import Signal

# Sent on commit whenever a ServerModel row's state or progress changed (argument: row_id);
# deployments waits on these files and connects a receiver in its AppConfig.ready().
server_files_changed = Signal()
