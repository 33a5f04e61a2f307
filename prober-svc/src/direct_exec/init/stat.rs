//! Fields of `/proc/<pid>/stat`, read after the parenthesised command (which may hold spaces and
//! parentheses of its own).

/// Field 3 of `/proc/<pid>/stat`: the state letter.
pub(super) fn state(stat: &str) -> Option<char> {
    stat[stat.rfind(')')? + 2..].chars().next()
}

/// Field 22 of `/proc/<pid>/stat` (after the parenthesised command, which may hold spaces).
pub fn start_time(stat: &str) -> Option<u64> {
    let rest = &stat[stat.rfind(')')? + 2..];
    rest.split(' ').nth(19)?.parse().ok()
}

/// Field 4 of `/proc/<pid>/stat`: the parent's PID.
pub fn parent_pid(stat: &str) -> Option<i32> {
    let rest = &stat[stat.rfind(')')? + 2..];
    rest.split(' ').nth(1)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_after_a_command_with_spaces_and_parentheses() {
        let stat = "42 (a b) c) S 7 42 42 0 -1 4194560 1 0 0 0 0 0 0 0 20 0 1 0 12345 1 2";
        assert_eq!(state(stat), Some('S'));
        assert_eq!(parent_pid(stat), Some(7));
        assert_eq!(start_time(stat), Some(12345));
    }
}
