"""inferd on Ray Serve (``inferd[ray]``): a model repository deployed as a Serve application.

``deploy.py`` (``inferd serve-ray``) starts Serve's HTTP and gRPC proxies and the application;
``replica.py`` is one replica (inferd's core in process); ``collector.py`` and ``aggregate.py`` make
the statistics and metrics a client reads the whole application's. Ray is imported only here.
"""
