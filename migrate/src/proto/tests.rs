use super::*;

#[test]
fn home_sets_are_spread_and_distinct() {
    for hosts in 1..20u32 {
        for t in 0..200u64 {
            let h = home_set(TaskId(t), hosts, 2);
            assert_eq!(h.len(), 2.min(hosts as usize));
            assert!(h.iter().all(|x| *x < hosts));
            if hosts > 1 {
                assert_ne!(h[0], h[1]);
            }
        }
    }
    // Every host is some task's home.
    let mut seen = HashSet::new();
    for t in 0..500u64 {
        seen.insert(home_set(TaskId(t), 16, 1)[0]);
    }
    assert_eq!(seen.len(), 16);
}
