//! The error a built-in policy returns for a parameter value it cannot use, and the checks that
//! produce it.

/// A parameter value outside the range its policy accepts. The message names the field, the
/// accepted range and the value given.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("`{field}` {requirement}, got {value}; {advice}")]
pub struct InvalidParameter {
    /// The parameter's field name.
    pub field: &'static str,
    /// What the value must satisfy.
    pub requirement: &'static str,
    /// The value given, as written in the error.
    pub value: String,
    /// What to write instead.
    pub advice: &'static str,
}

/// Checks that `value` is a finite number ≥ 0.
pub fn non_negative(field: &'static str, value: f64) -> Result<f64, InvalidParameter> {
    if value.is_finite() && value >= 0.0 {
        Ok(value)
    } else {
        Err(InvalidParameter {
            field,
            requirement: "must be a finite number greater than or equal to 0",
            value: value.to_string(),
            advice: "use a value such as 0 or 1.0",
        })
    }
}

/// Checks that `value` is a finite number in `0..=1`.
pub fn fraction(field: &'static str, value: f64) -> Result<f64, InvalidParameter> {
    if value.is_finite() && (0.0..=1.0).contains(&value) {
        Ok(value)
    } else {
        Err(InvalidParameter {
            field,
            requirement: "must be a number between 0 and 1 inclusive",
            value: value.to_string(),
            advice: "use 0 to turn the feature off or a fraction such as 0.5",
        })
    }
}

/// Checks that a count is at least 1.
pub fn at_least_one(field: &'static str, value: usize) -> Result<usize, InvalidParameter> {
    if value >= 1 {
        Ok(value)
    } else {
        Err(InvalidParameter {
            field,
            requirement: "must be at least 1",
            value: value.to_string(),
            advice: "use 1 (the default) to act on any gain",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_in_range_values() {
        assert_eq!(non_negative("x", 0.0), Ok(0.0));
        assert_eq!(non_negative("x", 2.5), Ok(2.5));
        assert_eq!(fraction("x", 1.0), Ok(1.0));
        assert_eq!(at_least_one("x", 1), Ok(1));
    }

    #[test]
    fn rejects_out_of_range_values_naming_the_field() {
        for bad in [-0.1, f64::NAN, f64::INFINITY] {
            let error = non_negative("prefill_load_scale", bad).unwrap_err();
            assert!(
                error
                    .to_string()
                    .starts_with("`prefill_load_scale` must be"),
                "{error}"
            );
        }
        let error = fraction("shared_cache_multiplier", 1.5).unwrap_err();
        assert_eq!(
            error.to_string(),
            "`shared_cache_multiplier` must be a number between 0 and 1 inclusive, got 1.5; \
             use 0 to turn the feature off or a fraction such as 0.5"
        );
        assert!(at_least_one("min_additional_blocks", 0).is_err());
    }
}
