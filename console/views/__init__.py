"""The console's own pages, one module per page or group of pages (urls.py names each)."""
