"""kopf-free library shared by every operator: API access, logging, and the pure helpers."""
