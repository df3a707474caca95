// `import Tributary` is all an app needs: the value types it names in models, schemas, queries and sync (ObjectID,
// Value, PrimaryKey, Schema, ObjectSchema, Property, ReplicaID, VersionVector, Changeset, Dot...) come from
// TributaryModel and are re-exported here. The codec's building blocks there are package API.
@_exported public import TributaryModel
