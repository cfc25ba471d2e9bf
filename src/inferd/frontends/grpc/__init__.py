"""The gRPC front end: GRPCInferenceService on grpc.aio (imported only when gRPC is enabled)."""
