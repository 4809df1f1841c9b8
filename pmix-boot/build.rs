//! Links libpmix through its pkg-config file (Debian: libpmix-dev, `pmix.pc`).

fn main() {
    if let Err(e) = pkg_config::Config::new()
        .atleast_version("4.2")
        .probe("pmix")
    {
        panic!(
            "pmix-boot needs libpmix 4.2 or newer and its pkg-config file \
             (Debian: libpmix-dev; scripts/install-deps.sh installs it): {e}"
        );
    }
}
