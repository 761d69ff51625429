"""The DynamoDB RunStore and its S3 blobs: the store (`store`), its item layout
(`items`), conditional-write requests (`requests`), run reads and fencing (`runs`),
the effect ledger (`effects`), listing (`listing`), deletion (`deletion`), slice
bookkeeping for Step Functions (`slices`), location strings (`location`) and the
S3 blob and artifact stores (`s3`).

Kept empty on purpose: a Lambda handler that needs only `slices` must not pay
for importing the store and boto3's DynamoDB resources."""
