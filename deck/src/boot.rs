//! The job's bootstrap: how a DECK process started by `deckrun` learns its
//! node number and its peers' addresses.
