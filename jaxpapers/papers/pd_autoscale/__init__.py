"""pd_autoscale: learned autoscaling of PD-disaggregated LLM serving (abstract 12)."""
