"""The container backend's engine-independent parts: the Docker daemon connection and images
built from Debian packages without a registry."""
