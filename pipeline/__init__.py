"""walcast's Spark jobs: parse every vendor format from Kafka and materialize tables."""
