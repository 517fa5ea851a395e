"""The app's models module (Django sends post_migrate to apps that have one)."""
