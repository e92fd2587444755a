//! `closed_set!`: an enum whose values have fixed names on the wire,
//! with `NAMES`, `parse`, `as_str`, `Display` and `Serialize` (as the
//! name) derived from one table, so the names cannot drift apart.

/// Declares a fieldless enum and its wire names:
/// `pub enum Level { Info = "info", ... }`. A value written
/// `Name = "name" if "feature",` exists only in builds with that feature.
macro_rules! closed_set {
    (
        $(#[$meta:meta])*
        pub enum $ty:ident {
            $($(#[$vmeta:meta])* $variant:ident = $name:literal $(if $feature:literal)?,)+
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum $ty {
            $($(#[$vmeta])* $(#[cfg(feature = $feature)])? $variant,)+
        }

        impl $ty {
            /// Every value's name on the wire, in declaration order.
            pub const NAMES: &'static [&'static str] =
                &[$($(#[cfg(feature = $feature)])? $name),+];

            /// The value named `name` on the wire.
            pub fn parse(name: &str) -> Option<$ty> {
                match name {
                    $($(#[cfg(feature = $feature)])? $name => Some($ty::$variant),)+
                    _ => None,
                }
            }

            /// Its name on the wire.
            pub fn as_str(self) -> &'static str {
                match self {
                    $($(#[cfg(feature = $feature)])? $ty::$variant => $name,)+
                }
            }
        }

        impl std::fmt::Display for $ty {
            fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl serde::Serialize for $ty {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(self.as_str())
            }
        }
    };
}
