//! What the operator's test targets share: the API server stand-in. A target that lives in a
//! folder (`control_plane/`) names this file by its path; the others name `fake_api` inline.

pub mod fake_api;
