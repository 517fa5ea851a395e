"""An order service on Starlette: an order and its confirmation e-mail in one transaction (README.md)."""
