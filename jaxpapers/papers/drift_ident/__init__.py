"""Online identification of linear-in-parameter systems under parameter drift (abstract 11)."""
