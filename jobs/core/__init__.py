"""What the stages are made of: the Stage and Param declarations, the parameters several stages share, user errors."""
