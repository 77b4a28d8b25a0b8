"""Hooks for the schemathesis run in ContractTests: tus chunks (application/offset+octet-stream) are raw bytes, sent
as schemathesis sends application/octet-stream."""
import schemathesis

schemathesis.serializer.alias("application/offset+octet-stream", "application/octet-stream")
