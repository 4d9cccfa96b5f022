using PersistentServices.Log.Records;
using PersistentServices.Serialization;

namespace PersistentServices.Sessions;

/// <summary>
/// One <see cref="SessionStateAttribute"/> value of a session: either the live object (set by a request), or the bytes
/// a checkpoint restored, decoded on first use as the type the running code asks for (so a checkpoint carries no type
/// names, and a value nobody reads again is carried over byte for byte).
/// </summary>
internal abstract class SessionStateSlot
{
    /// <summary>The value as <typeparamref name="T"/>.</summary>
    public abstract T Get<T>(string name, ValueCodec codec);

    /// <summary>The value as the checkpoint logs it.</summary>
    public abstract (byte[] Bytes, ValueFormat Format) Encode(ValueCodec codec);

    public static SessionStateSlot Of<T>(T value) => new Live<T>(value);

    public static SessionStateSlot Restored(byte[] bytes, ValueFormat format) => new Encoded(bytes, format);

    private sealed class Live<TValue>(TValue value) : SessionStateSlot
    {
        public override T Get<T>(string name, ValueCodec codec) => value is T typed ? typed : value is null ? default! : throw TypeChanged<T>(name, typeof(TValue));

        public override (byte[] Bytes, ValueFormat Format) Encode(ValueCodec codec) => codec.Encode(value);
    }

    private sealed class Encoded(byte[] bytes, ValueFormat format) : SessionStateSlot
    {
        private object? _decoded;
        private Type? _type;

        public override T Get<T>(string name, ValueCodec codec)
        {
            if (_type == typeof(T))
            {
                return (T)_decoded!;
            }

            try
            {
                var value = codec.Deserialize<T>(bytes, format);
                _decoded = value;
                _type = typeof(T);
                return value;
            }
            catch (ValueFormatException ex)
            {
                throw new ValueFormatException(
                    $"Session state '{name}' was checkpointed as {ex.Message}. Its type changed in a way the checkpoint cannot follow (docs/upgrades.md).", ex);
            }
        }

        public override (byte[] Bytes, ValueFormat Format) Encode(ValueCodec codec) => (bytes, format);
    }

    private static InvalidOperationException TypeChanged<T>(string name, Type stored)
        => new($"Session state '{name}' holds a {stored} but is read as {typeof(T)}: two [SessionState] properties share a name?");
}
