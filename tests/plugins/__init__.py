"""Plugins written for the tests, as a third party would write them."""
