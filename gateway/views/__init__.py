"""The gateway's pages: the chat page, and its panel on a deployment's page."""
