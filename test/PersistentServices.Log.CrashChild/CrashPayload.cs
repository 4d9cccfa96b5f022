namespace PersistentServices.Log.CrashChild;

/// <summary>The deterministic payload of record number <c>i</c>, shared (as a linked file) by the child and the tests.</summary>
internal static class CrashPayload
{
    public static byte[] For(long i, int maxLength)
    {
        var random = new Random(unchecked((int)(i * 2654435761L)));
        var bytes = new byte[random.Next(1, maxLength + 1)];
        random.NextBytes(bytes);
        return bytes;
    }
}
