"""The deployments app's pages: the list and a deployment's page, the wizard, the engine-settings
editor, the scale dialog, the logs, and the partials the live sockets send."""
