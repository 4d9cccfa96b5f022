using System.Globalization;

namespace PersistentServices.Log;

/// <summary>Names and lists FASTER's segment files: <c>{base}.{segment}</c> (ManagedLocalStorageDevice).</summary>
internal static class SegmentFiles
{
    /// <summary>FASTER's devices write whole sectors of this size: a segment file's length is always a multiple of it.</summary>
    public const int SectorSize = 512;

    public const string BaseName = "log";

    public static string BasePath(string directory) => Path.Combine(directory, BaseName);

    public static string PathOf(string basePath, int segment) => basePath + "." + segment.ToString(CultureInfo.InvariantCulture);

    /// <summary>Creates an empty segment file and makes its directory entry durable.</summary>
    public static void CreateDurably(string directory, int segment, UnixFileMode mode = DurableFile.OwnerOnly)
    {
        using (new FileStream(PathOf(BasePath(directory), segment), DurableFile.Create(FileMode.CreateNew, FileAccess.Write, FileShare.ReadWrite, mode)))
        {
        }

        DurableFile.FsyncDirectory(directory);
    }

    /// <summary>Segment number → file length, for the files present in <paramref name="directory"/>.</summary>
    public static SortedDictionary<int, long> List(string directory)
    {
        var result = new SortedDictionary<int, long>();
        if (!Directory.Exists(directory))
        {
            return result;
        }

        foreach (var file in new DirectoryInfo(directory).EnumerateFiles(BaseName + ".*"))
        {
            var suffix = file.Name[(BaseName.Length + 1)..];
            if (suffix.Length > 0 && suffix.All(char.IsAsciiDigit) &&
                int.TryParse(suffix, NumberStyles.None, CultureInfo.InvariantCulture, out var segment))
            {
                try
                {
                    result[segment] = file.Length;
                }
                catch (FileNotFoundException)
                {
                    // Deleted while listing (the log drops segments before its begin address): no longer part of the log.
                }
            }
        }

        return result;
    }

    /// <summary>Deletes segment files wholly before <paramref name="beginAddress"/> (left behind when a crash came between
    /// recording a new begin address and deleting them).</summary>
    public static int DeleteSegmentsBefore(string directory, LogOptions options, long beginAddress)
    {
        var basePath = SegmentFiles.BasePath(directory);
        var beginSegment = (int)(beginAddress >> options.SegmentSizeBits);
        var deleted = 0;
        foreach (var (id, _) in SegmentFiles.List(directory).Where(s => s.Key < beginSegment))
        {
            File.Delete(SegmentFiles.PathOf(basePath, id));
            deleted++;
        }

        if (deleted > 0)
        {
            DurableFile.FsyncDirectory(directory);
        }

        return deleted;
    }

    /// <summary>
    /// Cuts everything at and after <paramref name="committedUntil"/> from the segment files (and makes that durable). The
    /// segment keeps a whole number of sectors, zeros after the cut, as the log's own writes leave it.
    /// </summary>
    public static void TruncateTail(string directory, LogOptions options, long committedUntil)
    {
        var basePath = SegmentFiles.BasePath(directory);
        var segment = (int)(committedUntil >> options.SegmentSizeBits);
        var offset = committedUntil & ((1L << options.SegmentSizeBits) - 1);
        foreach (var (id, length) in SegmentFiles.List(directory))
        {
            if (id > segment)
            {
                File.Delete(SegmentFiles.PathOf(basePath, id));
            }
            else if (id == segment && length > offset)
            {
                DurableFile.Truncate(SegmentFiles.PathOf(basePath, id), offset, CeilSector(offset));
            }
        }

        DurableFile.FsyncDirectory(directory);
    }

    /// <summary>The next sector boundary at or after <paramref name="address"/>.</summary>
    public static long CeilSector(long address) => (address + SectorSize - 1) & ~(long)(SectorSize - 1);
}
