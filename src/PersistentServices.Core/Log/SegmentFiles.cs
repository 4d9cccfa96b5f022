using System.Globalization;

namespace PersistentServices.Log;

/// <summary>Names and lists FASTER's segment files: <c>{base}.{segment}</c> (ManagedLocalStorageDevice).</summary>
internal static class SegmentFiles
{
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
}
