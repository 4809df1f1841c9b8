# `make install` / `make uninstall`: scripts/install.sh (see README, "Installing").
# The script builds with cargo (release) first.
PREFIX ?= /usr/local
DESTDIR ?=
INSTALL_ARGS = --prefix "$(PREFIX)" $(if $(DESTDIR),--destdir "$(DESTDIR)")

install:
	scripts/install.sh $(INSTALL_ARGS)

uninstall:
	scripts/install.sh $(INSTALL_ARGS) --uninstall

.PHONY: install uninstall
