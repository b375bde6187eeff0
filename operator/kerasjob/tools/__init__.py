"""Generators run at build time: the CRD from the API models (`crdgen`) and the reference
documentation (`docgen`)."""
