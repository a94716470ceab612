"""The expression language of rule conditions, impact estimates, texts and workflow guards."""
