//! The OpenAPI `format`s of the CRD schemas: only those the API server knows.
//!
//! schemars names each Rust integer type as a format (`uint8`, `uint16`, `uint32`, `uint64`),
//! which OpenAPI 3.0 does not define: the API server warns `unrecognized format "uint32"` for
//! each when a CRD is applied (Kubernetes 1.34 and later), once per field. [`kubernetes_formats`]
//! writes instead the nearest format the API server knows that holds the type (`int32` for
//! 8 and 16 bits, `int64` for 32 and 64) and keeps the type's range as `minimum`/`maximum`,
//! so the API server still refuses what the Rust type cannot hold. It is put on every kind's
//! spec and status (`#[schemars(transform = ...)]`) and reaches every schema below them, which
//! the CRD generator inlines.

use schemars::Schema;
use serde_json::Value;

/// The formats the API server knows (apiextensions-apiserver `validation/formats.go`, with
/// the integer and number formats of OpenAPI 3.0); any other gets a warning.
pub const KNOWN_FORMATS: &[&str] = &[
    "bsonobjectid",
    "uri",
    "email",
    "hostname",
    "ipv4",
    "ipv6",
    "cidr",
    "mac",
    "uuid",
    "uuid3",
    "uuid4",
    "uuid5",
    "isbn",
    "isbn10",
    "isbn13",
    "creditcard",
    "ssn",
    "hexcolor",
    "rgbcolor",
    "byte",
    "password",
    "date",
    "duration",
    "datetime",
    "date-time",
    "int32",
    "int64",
    "float",
    "double",
];

/// Rewrites `schema` and every schema below it so that each `format` is one of
/// [`KNOWN_FORMATS`]: Rust's integer formats become `int32`/`int64` with their range, and a
/// format the API server does not know (`ip`, say) is dropped.
pub fn kubernetes_formats(schema: &mut Schema) {
    if let Some(object) = schema.as_object_mut()
        && let Some(Value::String(format)) = object.get("format")
    {
        // (the format the API server knows, the type's least and greatest value)
        let known: Option<(&str, Option<i64>, Option<u64>)> = match format.as_str() {
            "uint8" => Some(("int32", Some(0), Some(u8::MAX.into()))),
            "uint16" => Some(("int32", Some(0), Some(u16::MAX.into()))),
            "uint32" => Some(("int64", Some(0), Some(u32::MAX.into()))),
            // Above i64::MAX the API server cannot store it anyway.
            "uint64" | "uint" | "uint128" => Some(("int64", Some(0), None)),
            "int8" => Some(("int32", Some(i8::MIN.into()), Some(i8::MAX as u64))),
            "int16" => Some(("int32", Some(i16::MIN.into()), Some(i16::MAX as u64))),
            "int" | "int128" => Some(("int64", None, None)),
            known if KNOWN_FORMATS.contains(&known) => None,
            _ => {
                object.remove("format");
                None
            }
        };
        if let Some((format, least, greatest)) = known {
            object.insert("format".into(), format.into());
            // A range written on the field (`#[schemars(range(..))]`) is narrower: kept.
            if let Some(least) = least {
                object.entry("minimum").or_insert(least.into());
            }
            if let Some(greatest) = greatest {
                object.entry("maximum").or_insert(greatest.into());
            }
        }
    }
    schemars::transform::transform_subschemas(&mut kubernetes_formats, schema);
}

#[cfg(test)]
mod tests {
    use super::*;
    use schemars::json_schema;

    #[derive(schemars::JsonSchema)]
    #[schemars(transform = kubernetes_formats)]
    #[allow(dead_code)]
    struct Sample {
        small: u8,
        port: u16,
        count: u32,
        #[schemars(range(min = 1, max = 100))]
        percent: Option<u32>,
        generation: u64,
        nested: Vec<Inner>,
        address: std::net::IpAddr,
    }

    #[derive(schemars::JsonSchema)]
    #[allow(dead_code)]
    struct Inner {
        weight: u32,
    }

    // Every integer format becomes one the API server knows, with the Rust type's range; a
    // range the field narrows is kept; nested schemas are rewritten too.
    #[test]
    fn integer_formats_are_the_api_servers_with_their_range() {
        let mut generator = schemars::generate::SchemaSettings::openapi3()
            .with(|s| s.inline_subschemas = true)
            .into_generator();
        let schema = generator.root_schema_for::<Sample>();
        let props = &schema.as_value()["properties"];
        let p = |name: &str| props[name].clone();
        assert_eq!(
            p("small"),
            json_schema!({"type": "integer", "format": "int32", "minimum": 0, "maximum": 255})
                .to_value()
        );
        assert_eq!(p("port")["format"], "int32");
        assert_eq!(p("port")["maximum"], 65535);
        assert_eq!(p("count")["format"], "int64");
        assert_eq!(p("count")["maximum"], u64::from(u32::MAX));
        assert_eq!(p("percent")["format"], "int64");
        assert_eq!(
            (
                p("percent")["minimum"].clone(),
                p("percent")["maximum"].clone()
            ),
            (1.into(), 100.into())
        );
        assert_eq!(p("generation")["format"], "int64");
        assert_eq!(p("generation")["minimum"], 0);
        assert!(p("generation").get("maximum").is_none());
        assert_eq!(
            p("nested")["items"]["properties"]["weight"]["format"],
            "int64"
        );
        assert!(p("address").get("format").is_none(), "{}", p("address"));
    }
}
