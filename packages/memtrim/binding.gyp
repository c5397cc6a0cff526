{
  "targets": [
    {
      "target_name": "memtrim",
      "sources": ["native/memtrim.c"]
    }
  ]
}
