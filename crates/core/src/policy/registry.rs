//! One registry mechanism for every policy family: each policy declares its
//! name, aliases, one line of help and its constructor once, in a table, and
//! parsing, "valid: ..." error messages and help text are generated from it.
//! A family adds a policy with one `Entry` line in its table; nothing else
//! lists names.

use thiserror::Error;

/// One policy of a family. `A` is what the family's constructors take (for
/// example the number of slots, or the rate configuration).
pub struct Entry<P: ?Sized + 'static, A: 'static> {
    pub name: &'static str,
    /// Other names it answers to (short forms).
    pub aliases: &'static [&'static str],
    pub help: &'static str,
    pub build: fn(A) -> Box<P>,
}

/// The policies of one family, in the order the docs and help list them.
pub struct Registry<P: ?Sized + 'static, A: 'static> {
    /// The family's name in messages: "destage order", "write policy", ...
    pub family: &'static str,
    pub entries: &'static [Entry<P, A>],
}

/// A name that no policy of the family answers to.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
#[error("unknown {family} {name:?}; valid: {valid}")]
pub struct UnknownPolicy {
    pub family: &'static str,
    pub name: String,
    /// The family's names, comma separated.
    pub valid: String,
}

impl<P: ?Sized + 'static, A: 'static> Registry<P, A> {
    /// The policy called `name` or one of its aliases (ASCII case ignored).
    pub fn find(&self, name: &str) -> Result<&'static Entry<P, A>, UnknownPolicy> {
        self.entries
            .iter()
            .find(|e| {
                e.name.eq_ignore_ascii_case(name)
                    || e.aliases.iter().any(|a| a.eq_ignore_ascii_case(name))
            })
            .ok_or_else(|| UnknownPolicy {
                family: self.family,
                name: name.to_string(),
                valid: self.names().join(", "),
            })
    }

    /// Build the policy called `name` with the family's arguments.
    pub fn build(&self, name: &str, args: A) -> Result<Box<P>, UnknownPolicy> {
        Ok((self.find(name)?.build)(args))
    }

    /// The canonical names, in table order.
    pub fn names(&self) -> Vec<&'static str> {
        self.entries.iter().map(|e| e.name).collect()
    }

    /// One line per policy: `name (aliases): help`.
    pub fn help(&self) -> String {
        let mut out = String::new();
        for e in self.entries {
            out.push_str(e.name);
            if !e.aliases.is_empty() {
                out.push_str(&format!(" ({})", e.aliases.join(", ")));
            }
            out.push_str(": ");
            out.push_str(e.help);
            out.push('\n');
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    trait Shape {
        fn sides(&self) -> u32;
    }
    struct Polygon(u32);
    impl Shape for Polygon {
        fn sides(&self) -> u32 {
            self.0
        }
    }
    static SHAPES: Registry<dyn Shape, u32> = Registry {
        family: "shape",
        entries: &[
            Entry {
                name: "triangle",
                aliases: &["tri"],
                help: "three sides",
                build: |_| Box::new(Polygon(3)),
            },
            Entry {
                name: "ngon",
                aliases: &[],
                help: "n sides",
                build: |n| Box::new(Polygon(n)),
            },
        ],
    };

    #[test]
    fn finds_names_and_aliases_ignoring_case() {
        assert_eq!(SHAPES.build("Triangle", 0).map(|s| s.sides()), Ok(3));
        assert_eq!(SHAPES.build("TRI", 0).map(|s| s.sides()), Ok(3));
        assert_eq!(SHAPES.build("ngon", 7).map(|s| s.sides()), Ok(7));
        assert_eq!(SHAPES.names(), ["triangle", "ngon"]);
        assert_eq!(
            SHAPES.help(),
            "triangle (tri): three sides\nngon: n sides\n"
        );
    }

    #[test]
    fn unknown_name_lists_the_valid_ones() {
        let e = SHAPES.find("circle").err().expect("no circle");
        assert_eq!(
            e.to_string(),
            "unknown shape \"circle\"; valid: triangle, ngon"
        );
    }
}
