using System.Text.Json;
using PersistentServices.Log.Records;

namespace PersistentServices.Serialization;

/// <summary>
/// Encodes user values for the log: shared variables' values and session state in checkpoints. A value is written in
/// the codec's <see cref="Format"/> and read back in the format it was written in, so logs written by earlier builds
/// (JSON shared values) keep recovering (docs/log-format.md, "User values").
/// </summary>
internal abstract class ValueCodec
{
    private static readonly JsonSerializerOptions Json = new(JsonSerializerDefaults.General);

    /// <summary>The format this codec writes where it can (some types it may write as JSON: <see cref="Encode{T}"/> says).</summary>
    public abstract ValueFormat Format { get; }

    /// <summary>Encodes <paramref name="value"/>; returns the bytes and the format they are in.</summary>
    public abstract (byte[] Bytes, ValueFormat Format) Encode<T>(T value);

    /// <summary>Reads a value written in <paramref name="format"/>.</summary>
    /// <exception cref="ValueFormatException">The bytes cannot be read as <typeparamref name="T"/>.</exception>
    public T Deserialize<T>(ReadOnlySpan<byte> bytes, ValueFormat format)
    {
        try
        {
            return format switch
            {
                ValueFormat.Json => JsonSerializer.Deserialize<T>(bytes, Json)!,
                _ when format == Format => DeserializeOwn<T>(bytes),
                _ => throw new ValueFormatException($"a value in format {format}, which this build cannot read"),
            };
        }
        catch (Exception ex) when (ex is not ValueFormatException and not OutOfMemoryException)
        {
            throw new ValueFormatException($"a {format} value that does not read as {typeof(T)}: {ex.Message}", ex);
        }
    }

    protected abstract T DeserializeOwn<T>(ReadOnlySpan<byte> bytes);

    /// <summary>JSON (System.Text.Json), as every value was logged before <see cref="ValueFormat"/> existed.</summary>
    protected static byte[] SerializeJson<T>(T value) => JsonSerializer.SerializeToUtf8Bytes(value, Json);
}

/// <summary>The JSON codec: the engine's default where no other is configured (tests, tools).</summary>
internal sealed class JsonValueCodec : ValueCodec
{
    public static readonly JsonValueCodec Instance = new();

    public override ValueFormat Format => ValueFormat.Json;

    public override (byte[] Bytes, ValueFormat Format) Encode<T>(T value) => (SerializeJson(value), ValueFormat.Json);

    protected override T DeserializeOwn<T>(ReadOnlySpan<byte> bytes) => throw new InvalidOperationException("JSON is read by the base class.");
}
