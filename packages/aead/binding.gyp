{
  "targets": [
    {
      "target_name": "aead",
      "sources": ["native/aead.c"]
    }
  ]
}
