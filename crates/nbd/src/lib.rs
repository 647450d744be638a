//! wcache-nbd: the NBD protocol, server side.
