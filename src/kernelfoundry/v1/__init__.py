"""Generated protobuf messages of the kernelfoundry.v1 API (see protos/). Never edit by hand."""
