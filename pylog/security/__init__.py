"""Authentication and authorization: TLS, SASL mechanisms and credentials, ACLs."""
