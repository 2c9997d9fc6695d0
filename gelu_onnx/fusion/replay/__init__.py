"""Template replay: the matcher once per distinct neighbourhood, its answer carried to every
anchor confirmed alike by array gathers (matches; trace, template)."""
