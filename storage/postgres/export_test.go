package postgres

// EncodeMeta lets tests write sessions rows as the driver does.
var EncodeMeta = encodeMeta
