"""FlowGDA: flow-matching gradual domain adaptation (abstract 10)."""
