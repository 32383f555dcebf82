//! Canary: a linked build holds the policies of every catalog it links. If a catalog is not
//! linked (nothing names it) or link-time registration does not work on this target, the
//! catalog's policies silently disappear; this test fails instead.

use dynamo_kv_router::plugins::PolicyRegistry;

/// Links each catalog (`use <crate> as _;`) and lists the policies it must register.
/// Adding a catalog is one line here (plus its dev-dependency).
macro_rules! linked_catalogs {
    ($($krate:ident => [$($name:literal),* $(,)?]),* $(,)?) => {
        $(use $krate as _;)*
        const CATALOGS: &[(&str, &[&str])] = &[$((stringify!($krate), &[$($name),*])),*];
    };
}

linked_catalogs! {
    dynamo_router_catalog => ["dynamo-default-cost-fn", "kv_fetch", "kvcr"],
    harness_prefetch => ["harness_prefetch"],
    session_affinity => ["session-affinity"],
}

#[test]
fn every_linked_catalog_registers_its_policies() {
    let registry = PolicyRegistry::linked().expect("the linked registrations are valid");
    for (krate, names) in CATALOGS {
        for name in *names {
            let entry = registry.get(name).unwrap_or_else(|| {
                panic!("`{name}` of catalog `{krate}` is not registered; linked: {registry:?}")
            });
            let registered_by = entry
                .location
                .crate_name
                .as_deref()
                .map(|c| c.replace('-', "_"));
            assert_eq!(
                registered_by.as_deref(),
                Some(*krate),
                "`{name}`: {:?}",
                entry.location
            );
        }
    }
}

#[test]
fn nothing_but_the_listed_catalogs_is_linked() {
    let registry = PolicyRegistry::linked().expect("the linked registrations are valid");
    let mut expected: Vec<&str> = CATALOGS
        .iter()
        .flat_map(|(_, names)| names.iter().copied())
        .collect();
    expected.sort_unstable();
    let linked: Vec<&str> = registry
        .entries()
        .map(|entry| entry.name.as_str())
        .collect();
    assert_eq!(linked, expected, "list every linked catalog above");
}
