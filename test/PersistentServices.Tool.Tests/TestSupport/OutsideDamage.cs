namespace PersistentServices.Tool.Tests.TestSupport;

/// <summary>Kinds of damage done to a log directory from outside the service (issue 15's list).</summary>
internal enum DamageKind
{
    /// <summary>One bit flipped anywhere in a segment file.</summary>
    Flip,

    /// <summary>A 4 KiB page (4 KiB-aligned) of a segment file overwritten with zeros.</summary>
    ZeroedPage,

    /// <summary>A segment file deleted.</summary>
    DeletedSegment,

    /// <summary>A segment file cut to a random length.</summary>
    TruncatedRandom,

    /// <summary>A segment file cut at a random 4 KiB boundary.</summary>
    Truncated4KiB,

    /// <summary><c>commit.meta</c> damaged: a flip, a slot or both zeroed, deleted, cut, or replaced with garbage.</summary>
    Metadata,

    /// <summary>Random bytes appended after the data of the last segment file.</summary>
    GarbageAfterData,
}

/// <summary>Applies one <see cref="DamageKind"/> at a random position; returns a description of what it did.</summary>
internal static class OutsideDamage
{
    public static string Apply(DamageKind kind, string directory, Random random)
    {
        var segments = Directory.GetFiles(directory, "log.*").Where(f => Path.GetExtension(f).Length > 1 && Path.GetExtension(f)[1..].All(char.IsAsciiDigit))
            .OrderBy(f => int.Parse(Path.GetExtension(f)[1..], System.Globalization.CultureInfo.InvariantCulture)).ToArray();
        var nonEmpty = segments.Where(f => new FileInfo(f).Length > 0).ToArray();
        var segment = nonEmpty.Length > 0 ? nonEmpty[random.Next(nonEmpty.Length)] : null;
        var last = nonEmpty.Length > 0 ? nonEmpty[^1] : null;
        var metadata = Path.Combine(directory, "commit.meta");
        switch (kind)
        {
            case DamageKind.Flip when segment is not null:
            {
                var length = new FileInfo(segment).Length;
                var offset = random.NextInt64(length);
                var bit = random.Next(8);
                using var stream = new FileStream(segment, FileMode.Open, FileAccess.ReadWrite);
                stream.Position = offset;
                var b = stream.ReadByte();
                stream.Position = offset;
                stream.WriteByte((byte)(b ^ (1 << bit)));
                return $"flipped bit {bit} at offset {offset} of {Path.GetFileName(segment)} ({length} bytes)";
            }

            case DamageKind.ZeroedPage when segment is not null:
            {
                var length = new FileInfo(segment).Length;
                var offset = random.NextInt64(length) & ~4095L;
                var count = (int)Math.Min(4096, length - offset);
                using var stream = new FileStream(segment, FileMode.Open, FileAccess.Write);
                stream.Position = offset;
                stream.Write(new byte[count]);
                return $"zeroed [{offset}, {offset + count}) of {Path.GetFileName(segment)} ({length} bytes)";
            }

            case DamageKind.DeletedSegment when segments.Length > 0:
            {
                var victim = segments[random.Next(segments.Length)];
                var length = new FileInfo(victim).Length;
                File.Delete(victim);
                return $"deleted {Path.GetFileName(victim)} ({length} bytes)";
            }

            case DamageKind.TruncatedRandom when last is not null:
            {
                var victim = random.Next(3) == 0 ? segment! : last;
                var length = new FileInfo(victim).Length;
                var cut = random.NextInt64(length);
                SetLength(victim, cut);
                return $"cut {Path.GetFileName(victim)} from {length} to {cut} bytes";
            }

            case DamageKind.Truncated4KiB when last is not null:
            {
                var victim = random.Next(3) == 0 ? segment! : last;
                var length = new FileInfo(victim).Length;
                var cut = random.NextInt64(length) & ~4095L;
                SetLength(victim, cut);
                return $"cut {Path.GetFileName(victim)} from {length} to {cut} bytes (a 4 KiB boundary)";
            }

            case DamageKind.Metadata when File.Exists(metadata):
                return DamageMetadata(metadata, random);

            case DamageKind.GarbageAfterData when last is not null:
            {
                var garbage = new byte[random.Next(1, 8193)];
                random.NextBytes(garbage);
                using var stream = new FileStream(last, FileMode.Append, FileAccess.Write);
                var length = stream.Length;
                stream.Write(garbage);
                return $"appended {garbage.Length} random bytes to {Path.GetFileName(last)} ({length} bytes)";
            }

            default:
                return $"nothing to damage for {kind}";
        }
    }

    private static string DamageMetadata(string path, Random random)
    {
        var bytes = File.ReadAllBytes(path);
        switch (random.Next(7))
        {
            case 0:
                var offset = random.Next(bytes.Length);
                bytes[offset] ^= (byte)(1 << random.Next(8));
                File.WriteAllBytes(path, bytes);
                return $"commit.meta: flipped a bit at offset {offset}";
            case 1:
                Array.Clear(bytes, 0, Math.Min(512, bytes.Length));
                File.WriteAllBytes(path, bytes);
                return "commit.meta: slot 0 zeroed";
            case 2:
                Array.Clear(bytes, 512, Math.Max(0, Math.Min(512, bytes.Length - 512)));
                File.WriteAllBytes(path, bytes);
                return "commit.meta: slot 1 zeroed";
            case 3:
                File.WriteAllBytes(path, new byte[bytes.Length]);
                return "commit.meta: both slots zeroed";
            case 4:
                File.Delete(path);
                return "commit.meta: deleted";
            case 5:
                var length = random.Next(bytes.Length);
                SetLength(path, length);
                return $"commit.meta: cut to {length} bytes";
            default:
                random.NextBytes(bytes);
                File.WriteAllBytes(path, bytes);
                return "commit.meta: replaced with random bytes";
        }
    }

    private static void SetLength(string path, long length)
    {
        using var stream = new FileStream(path, FileMode.Open, FileAccess.Write);
        stream.SetLength(length);
    }
}
