//! NVMe Qualified Name syntax (NVMe Base Specification, "NVMe Qualified Names").
//!
//! The specification names two forms:
//! - `nqn.YYYY-MM.reverse.domain:anything`: the date a domain was owned, the domain
//!   reversed, then a colon and a string of the owner's choosing;
//! - `nqn.2014-08.org.nvmexpress:uuid:xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`.
//!
//! Like Linux's nvmet (which takes `blktests-subsystem-1`), the target accepts any name of
//! 1..=223 bytes (UTF-8, so that with its NUL it fits the 256-byte Connect data fields) without
//! whitespace or control characters: [`validate_nqn`]. A name outside the two forms is only
//! warned about when the configuration loads ([`nqn_form_warning`]).

/// Longest NQN in bytes.
pub const MAX_NQN_BYTES: usize = 223;

/// The well-known discovery subsystem NQN (reserved: not a configurable subsystem).
pub const DISCOVERY_NQN: &str = "nqn.2014-08.org.nvmexpress.discovery";

const UUID_PREFIX: &str = "nqn.2014-08.org.nvmexpress:uuid:";

/// Checks that `nqn` can be used at all (what nvmet accepts); the error says what is wrong.
pub fn validate_nqn(nqn: &str) -> Result<(), String> {
    if nqn.is_empty() {
        return Err("is empty (write e.g. \"nqn.2026-11.io.example:disk1\")".into());
    }
    if nqn.len() > MAX_NQN_BYTES {
        return Err(format!(
            "is {} bytes long, the limit is {MAX_NQN_BYTES}",
            nqn.len()
        ));
    }
    if nqn.chars().any(|c| c.is_control() || c.is_whitespace()) {
        return Err(format!("{nqn:?} contains whitespace or control characters"));
    }
    Ok(())
}

/// Why a valid `nqn` is not in one of the specification's two forms, if it is not: worth a
/// warning (other hosts or targets may refuse it), not an error (Linux accepts it).
pub fn nqn_form_warning(nqn: &str) -> Option<String> {
    const EXAMPLE: &str = "the NVMe forms are e.g. \"nqn.2026-11.io.example:disk1\" or \
                           \"nqn.2014-08.org.nvmexpress:uuid:<uuid>\"";
    if let Some(uuid) = nqn.strip_prefix(UUID_PREFIX) {
        return validate_uuid(uuid)
            .err()
            .map(|e| format!("{nqn:?}: UUID form: {e}"));
    }
    let Some(rest) = nqn.strip_prefix("nqn.") else {
        return Some(format!("{nqn:?} does not start with \"nqn.\" ({EXAMPLE})"));
    };
    let date_ok = rest.len() > 8
        && rest.as_bytes()[..4].iter().all(u8::is_ascii_digit)
        && rest.as_bytes()[4] == b'-'
        && rest.as_bytes()[5..7].iter().all(u8::is_ascii_digit)
        && rest.as_bytes()[7] == b'.'
        && matches!(
            &rest[5..7],
            "01" | "02" | "03" | "04" | "05" | "06" | "07" | "08" | "09" | "10" | "11" | "12"
        );
    if !date_ok {
        return Some(format!(
            "{nqn:?} lacks the \"YYYY-MM.\" date after \"nqn.\" ({EXAMPLE})"
        ));
    }
    let Some((domain, name)) = rest[8..].split_once(':') else {
        return Some(format!(
            "{nqn:?} lacks the ':' between the reversed domain and the name ({EXAMPLE})"
        ));
    };
    let labels_ok = !domain.is_empty()
        && domain.split('.').all(|l| {
            !l.is_empty()
                && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
                && !l.starts_with('-')
                && !l.ends_with('-')
        });
    if !labels_ok {
        return Some(format!(
            "{nqn:?}: {domain:?} is not a reversed domain name ({EXAMPLE})"
        ));
    }
    if name.is_empty() {
        return Some(format!("{nqn:?} has nothing after the ':' ({EXAMPLE})"));
    }
    None
}

/// Checks the textual UUID form `xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx` (hex digits).
pub fn validate_uuid(uuid: &str) -> Result<(), String> {
    parse_uuid(uuid).map(|_| ())
}

/// Parses the textual UUID form into its 16 bytes (as NVMe's NIDT 3 descriptor carries them).
pub fn parse_uuid(uuid: &str) -> Result<[u8; 16], String> {
    let groups: Vec<&str> = uuid.split('-').collect();
    let lens: Vec<usize> = groups.iter().map(|g| g.len()).collect();
    if lens != [8, 4, 4, 4, 12] || !uuid.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-') {
        return Err(format!(
            "{uuid:?} is not a UUID (expected xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx, hex digits)"
        ));
    }
    let hex: String = groups.concat();
    let mut out = [0u8; 16];
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).expect("checked hex digits");
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_two_forms_are_valid_without_warning() {
        for nqn in [
            "nqn.2026-11.io.rdmablk:quickstart",
            "nqn.2014-08.org.nvmexpress:uuid:f81d4fae-7dec-11d0-a765-00a0c91e6bf6",
            "nqn.2016-06.io.spdk:cnode1",
        ] {
            validate_nqn(nqn).unwrap();
            assert_eq!(nqn_form_warning(nqn), None, "{nqn}");
        }
    }

    #[test]
    fn names_nvmet_takes_are_valid_with_a_warning() {
        for odd in [
            "blktests-subsystem-1",
            "iqn.2026-11.io.rdmablk:x",
            "nqn.2026-13.io.rdmablk:x",
            "nqn.26-11.io.rdmablk:x",
            "nqn.2026-11.io.rdmablk",
            "nqn.2026-11.io.rdmablk:",
            "nqn.2026-11..rdmablk:x",
            "nqn.2014-08.org.nvmexpress:uuid:not-a-uuid",
        ] {
            validate_nqn(odd).unwrap_or_else(|e| panic!("{odd:?} refused: {e}"));
            assert!(nqn_form_warning(odd).is_some(), "{odd:?} not warned about");
        }
    }

    #[test]
    fn refuses_unusable_names() {
        for bad in ["", "nqn.2026-11.io.rdmablk:has space", "tab\there", "nul\0"] {
            assert!(validate_nqn(bad).is_err(), "{bad:?} accepted");
        }
        let long = format!("nqn.2026-11.io.rdmablk:{}", "x".repeat(MAX_NQN_BYTES));
        assert!(validate_nqn(&long).unwrap_err().contains("223"));
        validate_nqn(&"x".repeat(MAX_NQN_BYTES)).unwrap();
    }

    #[test]
    fn parses_uuid_bytes() {
        let b = parse_uuid("f81d4fae-7dec-11d0-a765-00a0c91e6bf6").unwrap();
        assert_eq!(b[0], 0xf8);
        assert_eq!(b[15], 0xf6);
    }
}
