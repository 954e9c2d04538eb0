"""Backend-neutral kernel IR: loop nests over static shapes that every renderer prints."""
