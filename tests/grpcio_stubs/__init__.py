"""grpcio's stubs of the kubelet plugin's services, for the tests' clients and stand-in servers
only: the node agent serves with grpclib (its ``*_grpc.py`` beside the messages), and the image
has no grpcio. ``make protos`` regenerates both."""
