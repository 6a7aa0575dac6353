//! Fabric conformance suite.
