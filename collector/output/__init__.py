"""What an export writes: CSV and Parquet files, staged and published whole."""
