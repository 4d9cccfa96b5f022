using System.Globalization;

namespace PersistentServices.Log;

/// <summary>Names and lists FASTER's segment files: <c>{base}.{segment}</c> (ManagedLocalStorageDevice).</summary>
internal static class SegmentFiles
{
    public const string BaseName = "log";

    public static string BasePath(string directory) => Path.Combine(directory, BaseName);

    public static string PathOf(string basePath, int segment) => basePath + "." + segment.ToString(CultureInfo.InvariantCulture);

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
                result[segment] = file.Length;
            }
        }

        return result;
    }
}
