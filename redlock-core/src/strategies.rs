//! proptest strategies for property-testing an integration of the engine (feature `proptest`).
